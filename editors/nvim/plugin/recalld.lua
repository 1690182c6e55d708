-- The commands of the recalld plugin (see lua/recalld/init.lua).
if vim.g.loaded_recalld then
  return
end
vim.g.loaded_recalld = true

vim.api.nvim_create_user_command("Recall", function(opts)
  require("recalld").recall(opts.args)
end, { nargs = "+", desc = "Search recalld; hits into the quickfix list" })

vim.api.nvim_create_user_command("RecallRemember", function(opts)
  require("recalld").remember(opts.args, opts.line1, opts.line2)
end, { nargs = "*", range = true, desc = "Remember the selected lines (or the text given)" })

vim.api.nvim_create_user_command("RecallStatus", function()
  require("recalld").status()
end, { nargs = 0, desc = "recalld's state, model and counts" })

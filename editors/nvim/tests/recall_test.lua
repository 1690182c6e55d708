-- Headless test of the plugin against a running daemon (driven by tests/integration/test_nvim.py):
--   nvim --headless -u NONE -i NONE --cmd "set rtp^=editors/nvim" -c "runtime plugin/recalld.lua" \
--        -c "luafile editors/nvim/tests/recall_test.lua"
-- RECALLD_TEST_QUERY is searched with :Recall, the selection below is remembered with
-- :RecallRemember, :RecallStatus is run; what happened is written as JSON to RECALLD_TEST_OUT.
-- Exits 0 (qa!) when every step got an answer, 1 (cquit) otherwise.

local out = { messages = {} }

vim.notify = function(message, level)
  table.insert(out.messages, { message = message, level = level })
end

local function finish(ok, why)
  out.ok = ok
  out.why = why
  local file = io.open(vim.env.RECALLD_TEST_OUT, "w")
  file:write(vim.fn.json_encode(out))
  file:close()
  if ok then
    vim.cmd("qa!")
  else
    vim.cmd("cquit 1")
  end
end

local ok, err = pcall(function()
  -- :Recall puts the hits into the quickfix list.
  vim.cmd("Recall " .. vim.env.RECALLD_TEST_QUERY)
  if not vim.wait(15000, function()
    return #vim.fn.getqflist() > 0
  end, 20) then
    error("no quickfix entries for :Recall")
  end
  out.quickfix = {}
  for _, item in ipairs(vim.fn.getqflist()) do
    table.insert(out.quickfix, {
      filename = item.bufnr > 0 and vim.fn.fnamemodify(vim.fn.bufname(item.bufnr), ":p") or "",
      lnum = item.lnum,
      text = item.text,
    })
  end
  out.title = vim.fn.getqflist({ title = 1 }).title

  -- :RecallRemember on a selection (lines 2-3 of a scratch buffer).
  vim.cmd("enew")
  vim.api.nvim_buf_set_lines(0, 0, -1, false, {
    "not this line",
    "The cormorant deploy key rotates every ninety days",
    "and lives in the ops vault.",
  })
  local before = #out.messages
  vim.cmd("2,3RecallRemember")
  if not vim.wait(15000, function()
    return #out.messages > before
  end, 20) then
    error("no answer to :RecallRemember")
  end
  out.remembered = out.messages[#out.messages].message

  before = #out.messages
  vim.cmd("RecallStatus")
  if not vim.wait(15000, function()
    return #out.messages > before
  end, 20) then
    error("no answer to :RecallStatus")
  end
  out.status = out.messages[#out.messages].message
end)

finish(ok, err and tostring(err) or nil)

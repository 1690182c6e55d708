-- recalld for Neovim: a client of the daemon's Unix socket (JSON-RPC 2.0, one JSON object per
-- line; docs/protocol.md), written against Neovim's own libuv (`vim.uv`, `vim.loop` before
-- 0.10) and nothing else, so it works from Neovim 0.7 on.
--
--   :Recall {query}      search; the hits go to the quickfix list with their source and line
--   :[range]RecallRemember [text]
--                        remember the selected lines (or the text given)
--   :RecallStatus        the daemon's state, model and counts
--
-- Settings: vim.g.recalld_socket (the socket path; default as the daemon resolves it from
-- RECALLD_DAEMON__SOCKET, RECALLD_HOME or the home folder), vim.g.recalld_limit (hits, 20).

local uv = vim.uv or vim.loop
local M = {}

local function encode(value)
  if vim.json then
    return vim.json.encode(value)
  end
  return vim.fn.json_encode(value)
end

local function decode(text)
  if vim.json then
    return vim.json.decode(text)
  end
  return vim.fn.json_decode(text)
end

--- The daemon's socket path.
function M.socket_path()
  if vim.g.recalld_socket and vim.g.recalld_socket ~= "" then
    return vim.fn.expand(vim.g.recalld_socket)
  end
  local env = vim.env
  if env.RECALLD_DAEMON__SOCKET and env.RECALLD_DAEMON__SOCKET ~= "" then
    return env.RECALLD_DAEMON__SOCKET
  end
  if env.RECALLD_HOME and env.RECALLD_HOME ~= "" then
    return env.RECALLD_HOME .. "/run/recalld.sock"
  end
  return vim.fn.expand("~/.cache/recalld/run/recalld.sock")
end

local next_id = 0

--- Call `method` with `params`; `callback(err, result)` runs on the main loop (scheduled).
--- Progress notifications are skipped; one connection per call.
function M.request(method, params, callback)
  next_id = next_id + 1
  local id = next_id
  local pipe = uv.new_pipe(false)
  local buffer = ""
  local finished = false

  local function finish(err, result)
    if finished then
      return
    end
    finished = true
    if not pipe:is_closing() then
      pipe:close()
    end
    vim.schedule(function()
      callback(err, result)
    end)
  end

  pipe:connect(M.socket_path(), function(connect_err)
    if connect_err then
      finish("recalld is not running (" .. connect_err .. "); start it with `recalld serve`")
      return
    end
    local line = encode({ jsonrpc = "2.0", id = id, method = method, params = params or vim.empty_dict() })
    pipe:write(line .. "\n")
    pipe:read_start(function(read_err, data)
      if read_err then
        finish(read_err)
        return
      end
      if not data then
        finish("the daemon closed the connection")
        return
      end
      buffer = buffer .. data
      while true do
        local newline = buffer:find("\n", 1, true)
        if not newline then
          break
        end
        local message = buffer:sub(1, newline - 1)
        buffer = buffer:sub(newline + 1)
        local ok, decoded = pcall(decode, message)
        if not ok then
          finish("bad answer from the daemon")
          return
        end
        if decoded.id == id then
          if decoded.error then
            finish(decoded.error.message or "error")
          else
            finish(nil, decoded.result)
          end
          return
        end
      end
    end)
  end)
end

--- Call and wait (up to `timeout` ms): returns err, result.
function M.request_sync(method, params, timeout)
  local done, err, result = false, nil, nil
  M.request(method, params, function(e, r)
    done, err, result = true, e, r
  end)
  if not vim.wait(timeout or 10000, function()
    return done
  end, 10) then
    return "recalld did not answer in time", nil
  end
  return err, result
end

local function one_line(text)
  return (text:gsub("%s+", " "):gsub("^ ", ""))
end

-- The line a hit starts at: code chunks say it; for text, find its first line in the file.
local function line_of(hit)
  local meta = hit.meta
  if type(meta) == "table" and tonumber(meta.start_line) then
    return tonumber(meta.start_line)
  end
  local source = hit.source
  if source:sub(1, 1) ~= "/" or vim.fn.filereadable(source) == 0 then
    return 1
  end
  local first = vim.trim((hit.text:match("[^\n]*%S[^\n]*") or ""))
  if first == "" then
    return 1
  end
  local ok, lines = pcall(vim.fn.readfile, source, "", 100000)
  if ok then
    for number, line in ipairs(lines) do
      if vim.trim(line) == first then
        return number
      end
    end
  end
  return 1
end

--- Quickfix items for a search result.
function M.quickfix_items(result)
  local items = {}
  for _, hit in ipairs(result.hits or {}) do
    local item = {
      text = string.format("%.3f %s", hit.score or 0, one_line(hit.text or "")),
      lnum = 1,
    }
    if type(hit.source) == "string" and hit.source:sub(1, 1) == "/" then
      item.filename = hit.source
      item.lnum = line_of(hit)
    else
      item.text = string.format("[%s] %s", hit.source or "?", item.text)
    end
    table.insert(items, item)
  end
  return items
end

local function notify(message, level)
  vim.notify("recalld: " .. message, level or vim.log.levels.INFO)
end

--- :Recall {query}
function M.recall(query)
  if not query or vim.trim(query) == "" then
    notify("give a query: :Recall {query}", vim.log.levels.WARN)
    return
  end
  M.request("search", { query = query, limit = vim.g.recalld_limit or 20 }, function(err, result)
    if err then
      notify(err, vim.log.levels.ERROR)
      return
    end
    local items = M.quickfix_items(result)
    vim.fn.setqflist({}, " ", { title = "Recall: " .. query, items = items })
    if #items == 0 then
      notify("nothing found for " .. query)
      return
    end
    vim.cmd("copen")
    notify(string.format("%d hit(s), tier %s", #items, result.tier or "?"))
  end)
end

--- :[range]RecallRemember [text]
function M.remember(text, line1, line2)
  if not text or vim.trim(text) == "" then
    text = table.concat(vim.api.nvim_buf_get_lines(0, line1 - 1, line2, false), "\n")
  end
  if vim.trim(text) == "" then
    notify("nothing to remember: select lines or give text", vim.log.levels.WARN)
    return
  end
  M.request("remember", { text = text }, function(err, result)
    if err then
      notify(err, vim.log.levels.ERROR)
      return
    end
    notify(string.format("remembered as %s (%s)", tostring(result.id), result.status or ""))
  end)
end

--- :RecallStatus
function M.status()
  M.request("status", nil, function(err, result)
    if err then
      notify(err, vim.log.levels.ERROR)
      return
    end
    local counts = result.counts or {}
    notify(
      string.format(
        "%s, model %s, %d documents, %d chunks, %d pending",
        result.state or "?",
        result.model or "?",
        counts.documents or 0,
        counts.chunks or 0,
        result.pending or 0
      )
    )
  end)
end

return M

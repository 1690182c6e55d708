"""The MCP adapter: `recalld mcp` serves the Model Context Protocol over stdio.

A thin layer over the socket client (`recalld.client.AsyncClient`): every tool is one socket
call, so the MCP process stays small and the daemon keeps the store, the model and the
watcher. It imports no daemon, storage or model code (checked by import-linter).
"""

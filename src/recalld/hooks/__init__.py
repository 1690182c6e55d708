"""Agent hooks: `recalld context`, run by a coding agent at session start, at each prompt and
at the end of each turn (issue 21). Kept apart from `recalld.cli` so a hook imports almost
nothing: it runs on every prompt, and the agent waits for it."""

"""Reusable test helpers: fakes that stand at process boundaries (see STYLE.md, Testing)."""

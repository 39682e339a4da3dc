"""The only code that imports rich or prompt_toolkit: the REPL, its command table,
renderables, the session picker and the plain-text listings of the CLI."""

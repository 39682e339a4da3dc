"""The conversation as a library: no terminal, no print. ``session.ChatSession``
owns a chat (send, close with summary, compact, resume); ``chain``, ``prompts``,
``turn``, ``context`` and ``agent`` are what it is built from."""

"""The agent's plugins for supervisord, which runs the four processes.

``zygote``: an ``[rpcinterface:zygote]`` factory, loaded into supervisord itself,
that pre-imports what the workers share and forks them in place instead of
exec'ing them. ``listener``: the ``[eventlistener:listener]`` program
(``sco-listener``) that records every process exit as an event in the spool.
They sit beside the four process packages and import only ``common``.
"""

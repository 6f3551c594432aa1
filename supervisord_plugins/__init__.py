"""The agent's plugins for supervisord, which runs the four processes.

``zygote``: an ``[rpcinterface:zygote]`` factory, loaded into supervisord itself,
that pre-imports what the workers share and forks them in place instead of
exec'ing them. ``process_events``: loaded by the same plugin, it forwards supervisord's
process exits to the spool as events, from inside supervisord (no listener process).
They sit beside the four process packages and import only ``common``.
"""

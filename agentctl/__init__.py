"""sco-agentctl, the operator's command (``__main__``); it sits above the four process packages."""

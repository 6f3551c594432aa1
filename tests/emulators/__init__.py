"""Emulated peers of the agent, all on one framework.

The shell: ``_server`` (``EmulatorServer``: service and control listeners, down/up, the
request log, the ``/_emu/`` commands every emulator has), ``_handler`` (reading, faults,
answers, streams), ``_faults`` (rules), ``_control`` (command dispatch and ``ControlClient``),
``_http`` (request/response values), ``_app`` (what an emulator provides: ``BaseApp``) and
``_process`` (the command line and the subprocess fixture side).

The emulators are apps of that shell: ``metadata`` (AWS, GCP, Azure, SCO), ``vector``
(Vector's http_server source) and ``kube`` (the Kubernetes API server), each with an
in-process class, a ``python -m`` entry and a ``*_fixture`` module that runs it as a process.
"""

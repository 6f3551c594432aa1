"""The Slurm scheduler: DRAIN the node, signal its jobs, requeue what stays -- or go around slurmctld.

``scheduler`` is the adapter the drain core drives (``executor.scheduler``) and
runs the recipe on its own worker thread; ``recipe`` is the recipe, ``rules``
its pure decisions, ``cli`` Slurm's command-line tools (this node only), and
``local`` the jobs' processes found and signalled without Slurm. Imported only on
a Slurm node.
"""

"""What a workload uses to hear the agent's reclaim notice and answer it; standard library only.

``client``: the Python client (``on_notice``), one file a workload can vendor.
``cli``: ``sco-checkpoint``, the same for shell scripts and Slurm batch jobs.
Nothing here imports the agent's own packages: a workload's environment needs
none of the agent's dependencies (tests/sco_checkpoint/test_stdlib_only.py).
"""

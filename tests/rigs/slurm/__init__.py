"""Debian-package Slurm test rig: install script, slurm.conf rendering, process guard."""

"""Launchers start a job's processes on its hosts and report when they are verifiably gone."""

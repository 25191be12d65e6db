"""Runs the commands of jobs placed on this machine: as the team's OS user, in a cgroup, with capped logs; and reads this machine's GPUs."""

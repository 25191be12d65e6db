"""The scheduling loop: its state (jobs, queues, the live cluster, assumed placements, timers, changes) and the collaborators that queue, place, make room, follow nodes and time runs."""

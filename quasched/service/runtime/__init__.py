"""The running service: the loop, store, executor and leadership composed under one lock, as callers see it (tokens, answers, live events)."""

"""Learning a placement policy in the simulator: a gymnasium environment over the
arrival experiment (:mod:`quasched.learn.env`) and an evolution strategy over the weights of
the ``learned`` policy (:mod:`quasched.learn.es`)."""

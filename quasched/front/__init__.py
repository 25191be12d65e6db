"""The federation front (``quasched federate``): jobs dispatched by carbon to running member clusters
(docs/federation.md, "The federation front")."""

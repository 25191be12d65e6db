"""quasched's device plugin: the kubelet's view of a node's GPUs as ``quasched.io/gpu-shares`` (docs/kubernetes.md).

- :mod:`.gpus`: the node's GPUs (NVML, or fake ones for tests) and their 100 share IDs each;
- :mod:`.livestate`: the GPUs' live state (NVML) published as a node annotation at a bounded rate;
- :mod:`.allocate`: which pod an ``Allocate`` is for and the environment its container gets (pure);
- :mod:`.plugin`: the gRPC servicer and the loop that serves it on the kubelet's socket directory and
  registers again whenever the kubelet restarts;
- ``api.proto`` and the modules generated from it: the kubelet's device-plugin API v1beta1 (the parts used).
"""

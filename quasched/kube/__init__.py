"""Kubernetes integration: the kube-scheduler extender, the pod/node convention and the cluster sync."""

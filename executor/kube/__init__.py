"""The Kubernetes scheduler: cordon and taint the node, evict its pods by the book, undo on withdrawal.

``scheduler`` is the adapter the drain core drives (``executor.scheduler``);
``runner`` walks one notice's recipe on its own threads; ``api`` is the REST
client (this node only); ``node_steps`` and ``node_patch`` the node changes;
``pod_filters``, ``drain_plan`` and ``eviction_book`` the pure decisions about
pods. Imported only on a Kubernetes node.
"""

"""The master process (control plane): ``python -m master``.

Modules: ``state`` (LMDB state machine, one ``apply(command)``), ``brokers`` (live registry),
``placement`` and ``assign`` (pure), ``groups`` (group coordinator), ``topic_ops`` and
``group_ops`` (admin operations), ``service`` / ``admin`` (gRPC servicers), ``server``.
"""

"""The master process (control plane): ``python -m master``.

Modules: ``state`` (LMDB state machine, one ``apply(command)``), ``brokers`` (live registry),
``placement`` and ``assign`` (pure), ``groups`` (group coordinator), ``topic_ops`` and
``group_ops`` (admin operations), ``service`` / ``admin`` (gRPC servicers), ``server``.
"""
from lib.process import one_blas_thread

one_blas_thread()  # before any module of the package loads numpy


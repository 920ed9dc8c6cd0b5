"""Locust load test of a tubeq cluster and its portal.

    locust -f load/locustfile.py --tubeq-masters HOST:PORT,... [--host PORTAL_URL]
    tubeq load run --scenario produce|consume|mixed|portal ...   (the usual way: docs/load-tests.md)

Users: ProducerUser, PullConsumerUser, PushConsumerUser (load/locust_data.py) and PortalUser
(load/locust_portal.py). Pick some with their class names on the command line.
"""
from load.locust_data import ProducerUser, PullConsumerUser, PushConsumerUser  # noqa: F401
from load.locust_portal import PortalUser  # noqa: F401

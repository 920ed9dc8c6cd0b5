"""A Locust ``HttpUser`` for the portal (``--host`` is its URL): logs in once per user as a
browser does (the login form's token, then the session cookie, then the dashboard the login
redirects to), then reads the pages and the JSON API an operator uses most. It logs in with
the user and password ``lib`` would use (TUBEQ_USER / TUBEQ_PASSWORD, or a credentials file:
see docs/security.md)."""
from __future__ import annotations

import re

from locust import HttpUser, between, task

from lib.auth.client import Credentials

LOGIN_TOKEN = re.compile(r'name="login_token" value="([^"]+)"')


class PortalUser(HttpUser):
    wait_time = between(0.5, 1.5)

    def on_start(self) -> None:
        self.topic = self.environment.parsed_options.tubeq_topic
        creds = Credentials.from_env()
        if creds is None or not creds.user:
            raise RuntimeError("the portal user logs in with a user and password: set "
                               "TUBEQ_USER and TUBEQ_PASSWORD (or a credentials file)")
        page = self.client.get("/login", name="/login")
        token = LOGIN_TOKEN.search(page.text)
        if token is None:
            raise RuntimeError(f"no login form at {self.host}/login (is it the portal?)")
        with self.client.post("/login", name="/login", allow_redirects=False, catch_response=True,
                              data={"user": creds.user, "password": creds.password,
                                    "login_token": token.group(1)}) as answer:
            if answer.status_code != 302:
                answer.failure(f"login refused: HTTP {answer.status_code} (check TUBEQ_USER and "
                               "TUBEQ_PASSWORD)")
                return
        self.dashboard()  # where the login's redirect lands, as in a browser

    @task(3)
    def dashboard(self) -> None:
        self.client.get("/", name="/ (dashboard)")

    @task(2)
    def topics(self) -> None:
        self.client.get("/topics", name="/topics")

    @task(2)
    def topic(self) -> None:
        self.client.get(f"/topics/{self.topic}", name="/topics/{name}")

    @task(1)
    def groups(self) -> None:
        self.client.get("/groups", name="/groups")

    @task(2)
    def api_overview(self) -> None:
        self.client.get("/api/v1/overview", name="/api/v1/overview")

    @task(1)
    def api_topics(self) -> None:
        self.client.get("/api/v1/topics?per_page=50", name="/api/v1/topics")

    @task(1)
    def newest_messages(self) -> None:
        self.client.get(f"/api/v1/topics/{self.topic}/messages?mode=newest&limit=20",
                        name="/api/v1/topics/{name}/messages")

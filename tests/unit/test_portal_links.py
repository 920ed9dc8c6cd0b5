"""Where the portal sends a browser back to (portal_web/links.py): only a plain path of this
site, read as a browser reads it; anything else is the dashboard."""
from __future__ import annotations

import pytest

from portal_web.links import back_link, local_or_home, same_site_path

HOSTILE = [
    "/\t/evil.example", "/\n/evil.example", "/\r/evil.example", "//evil.example",
    "/\\evil.example", "\\/evil.example", "/%2F/evil.example", "/%2f%2fevil.example",
    "/%5Cevil.example", "/%252F/evil.example", "/%25252F/evil.example", "/%09/evil.example",
    "/%0a/evil.example", "https://evil.example/", "HTTPS://evil.example", "javascript:alert(1)",
    " /topics", "/ /evil.example", "evil.example", "/\x00", "/\x7f", "/t\u00e9st", "",
    None, "/topics#frag", "/" + "a" * 2001,
]


@pytest.mark.parametrize("target", HOSTILE)
def test_anything_but_a_plain_same_site_path_goes_to_the_dashboard(target):
    assert same_site_path(target) is None
    assert local_or_home(target) == "/"


@pytest.mark.parametrize("target", [
    "/", "/topics", "/topics?q=ord&sort=-name&page=2", "/topics/a-b.c_d/messages?cursor=0:5,1:7",
    "/audit?principal=user%3Aalice", "/topics?q=a%2Fb"])
def test_a_plain_path_of_the_site_is_kept(target):
    assert local_or_home(target) == target


def test_the_back_link_is_the_referrer_only_when_it_is_another_page_of_this_site():
    host = "portal.example:8080"
    assert back_link(f"http://{host}/topics?q=x", host) == "/topics?q=x"
    assert back_link(f"https://{host}/groups/g", host) == "/groups/g"
    assert back_link("http://evil.example/topics", host) == "/"
    assert back_link(f"javascript://{host}/%0aalert(1)", host) == "/"
    assert back_link(f"http://{host}//evil.example", host) == "/"
    assert back_link(None, host) == back_link("", host) == "/"
    assert back_link(f"http://{host}/topics/x", host, here="/topics/x") == "/"  # not itself

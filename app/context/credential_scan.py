"""Does a memory import's text hold something shaped like a credential?

What an import holds goes to the provider with every request, so an import holding a key
(a token in a remote URL, an ``export AWS_SECRET_ACCESS_KEY=``) waits for the user's approval.
The shapes are detect-secrets' plugins (a maintained list of token formats, the same as a
pre-commit hook checks), run on the text in memory: no files written, no baseline, no
network (their ``verify`` is never called). Imported on the first scan only: it costs about
a quarter of a second, which a session without imports never pays.

Left out on purpose: the high-entropy string plugins (every commit hash and lock-file
checksum would ask) and the public IP plugin (an address is not a credential).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterator

# The text is looked at in pieces of about _PIECE characters cut at line ends. A line longer
# than _LONG_LINE is looked at in pieces of that size overlapping by more than a token's
# length: some plugins' patterns (npm's ``//.+/:_authToken``) cost the square of a line's
# length, so a 256 KB line of ``//`` must not be one line to them.
_PIECE = 16 * 1024
_LONG_LINE = 1024
_OVERLAP = 256


class _Plugin(Protocol):
    secret_type: str

    def analyze_string(self, string: str) -> Iterator[str]: ...


@lru_cache(maxsize=1)
def _plugins() -> tuple[tuple[_Plugin, ...], _Plugin, re.Pattern[str]]:
    # detect-secrets' plugins are slow to import: loaded on the first scan, off the start-up path.
    from detect_secrets.plugins.artifactory import ArtifactoryDetector
    from detect_secrets.plugins.aws import AWSKeyDetector
    from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
    from detect_secrets.plugins.basic_auth import BasicAuthDetector
    from detect_secrets.plugins.cloudant import CloudantDetector
    from detect_secrets.plugins.discord import DiscordBotTokenDetector
    from detect_secrets.plugins.github_token import GitHubTokenDetector
    from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
    from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
    from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
    from detect_secrets.plugins.jwt import JwtTokenDetector
    from detect_secrets.plugins.keyword import DENYLIST_REGEX, KeywordDetector
    from detect_secrets.plugins.mailchimp import MailchimpDetector
    from detect_secrets.plugins.npm import NpmDetector
    from detect_secrets.plugins.openai import OpenAIDetector
    from detect_secrets.plugins.private_key import PrivateKeyDetector
    from detect_secrets.plugins.pypi_token import PypiTokenDetector
    from detect_secrets.plugins.sendgrid import SendGridDetector
    from detect_secrets.plugins.slack import SlackDetector
    from detect_secrets.plugins.softlayer import SoftlayerDetector
    from detect_secrets.plugins.square_oauth import SquareOAuthDetector
    from detect_secrets.plugins.stripe import StripeDetector
    from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
    from detect_secrets.plugins.twilio import TwilioKeyDetector

    classes = (ArtifactoryDetector, AWSKeyDetector, AzureStorageKeyDetector, BasicAuthDetector,
               CloudantDetector, DiscordBotTokenDetector, GitHubTokenDetector, GitLabTokenDetector,
               IbmCloudIamDetector, IbmCosHmacDetector, JwtTokenDetector, MailchimpDetector, NpmDetector, OpenAIDetector, PrivateKeyDetector, PypiTokenDetector,
               SendGridDetector, SlackDetector, SoftlayerDetector, SquareOAuthDetector, StripeDetector,
               TelegramBotTokenDetector, TwilioKeyDetector)
    return tuple(cls() for cls in classes), KeywordDetector(), re.compile(DENYLIST_REGEX, re.IGNORECASE)


def _chunks(text: str) -> Iterator[str]:
    """``text`` in pieces of about _PIECE characters cut at line ends, long lines cut."""
    lines: list[str] = []
    length = 0
    for line in text.splitlines():
        if len(line) > _LONG_LINE:
            for start in range(0, len(line) - _OVERLAP, _LONG_LINE - _OVERLAP):
                yield line[start:start + _LONG_LINE]
            continue
        if length + len(line) > _PIECE and lines:
            yield "\n".join(lines)
            lines, length = [], 0
        lines.append(line)
        length += len(line) + 1
    if lines:
        yield "\n".join(lines)


def credential_kind(text: str) -> str | None:
    """The kind of the first credential-shaped string in ``text`` ("GitHub Token", "Basic
    Auth Credentials", ...), or None.

    The token-shaped plugins look at pieces of many lines at once (a match across a line end
    only errs towards asking); the keyword plugin (``password = "..."``) looks line by line,
    as it is made to, and only at the lines holding one of its own keywords: each of its
    patterns begins with that list, so the other lines cannot match."""
    token_plugins, keyword_plugin, keywords = _plugins()
    for piece in _chunks(text):
        for plugin in token_plugins:
            for _found in plugin.analyze_string(piece):
                return str(plugin.secret_type)
        if keywords.search(piece) is None:
            continue
        for line in piece.splitlines():
            if keywords.search(line) is not None:
                for _found in keyword_plugin.analyze_string(line):
                    return str(keyword_plugin.secret_type)
    return None

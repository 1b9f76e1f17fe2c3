"""Share links: a read-only view of one session's transcript behind an unguessable token (256 bits from
`secrets`). The store keeps only the token's sha256, so the token is shown once, when the share is made. The
CLI and the server make, open, list and revoke shares through these functions; opening answers the same
`NotFound` for a token that is malformed, unknown, revoked, expired or of a deleted session."""

from __future__ import annotations

import hashlib
import re
import secrets
import time

import msgspec

from ..errors import InvalidInput, NotFound, UnknownName
from ..ids import is_valid_id
from ..store.protocols import JournalShares, Shares
from ..store.records import SessionInfo, Share
from . import audit

TOKEN_BYTES = 32
"""Random bytes in a share token: 256 bits, far beyond guessing."""
SHARE_PATH = "/share/"
"""Where a server serves a share: ``/share/TOKEN``."""
MAX_EXPIRY = 10 * 365 * 86400.0
"""The longest expiry one may ask for (ten years); no expiry at all is also allowed."""
_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{32,128}\Z")
_IN_URL_RE = re.compile(re.escape(SHARE_PATH) + r"([A-Za-z0-9_-]+)")


class NewShare(msgspec.Struct, kw_only=True):
    """A share just made, with its token: the only time the token is known."""

    share: Share
    token: str


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def hash_token(token: str) -> bytes:
    """What the store keeps of a token. A plain sha256 is enough: the token is 256 random bits, so there is no
    dictionary to try, and the lookup by hash compares no secret byte by byte."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def share_url(base: str, token: str) -> str:
    """The link: the server's base URL (``http://host:port``, maybe a path behind a proxy) and the token."""
    return base.rstrip("/") + SHARE_PATH + token


def token_in(ref: str) -> str | None:
    """The token in a share link or a bare token, or None when `ref` is neither."""
    ref = ref.strip()
    found = _IN_URL_RE.search(ref)
    if found is not None:
        ref = found.group(1)
    return ref if _TOKEN_RE.match(ref) else None


async def create_share(store: Shares, session_id: str, *, expires_in: float | None = None) -> NewShare:
    """Share the session: a new link that serves until revoked or, with `expires_in` (seconds), until then."""
    if expires_in is not None and not 0 < expires_in <= MAX_EXPIRY:
        raise InvalidInput(f"a share expires in 1 second to 10 years, not {expires_in!r} seconds")
    token = new_token()
    expires_at = time.time() + expires_in if expires_in is not None else None
    share = await store.create_share(session_id, hash_token(token), expires_at=expires_at)
    return NewShare(share=share, token=token)


async def open_share(store: JournalShares, token: str) -> tuple[Share, SessionInfo]:
    """The live share that `token` opens and its session, read now (a revoke or a delete takes effect on the
    next request). One `NotFound` for every reason a link does not open, so that the answer tells nothing."""
    share = await store.share_by_token(hash_token(token)) if _TOKEN_RE.match(token) else None
    if share is not None and share.live(time.time()):
        try:
            info = await store.get_session(share.session_id)
        except NotFound:
            pass
        else:
            await audit.record(store, "share.opened", session_id=info.id, detail={"share": share.id})
            return share, info
    raise NotFound("no such share: the link is wrong, expired or revoked")


async def find_share(store: Shares, ref: str, *, session_id: str | None = None) -> Share:
    """The share that `ref` names: its id (``shr_...``), its token, or its link; with `session_id`, only one
    of that session's. Raises `NotFound`."""
    ref = ref.strip()
    if is_valid_id(ref):
        shares = await store.list_shares(session_id) if session_id is not None else await store.list_shares()
        found = next((s for s in shares if s.id == ref), None)
    else:
        token = token_in(ref)
        if token is None:
            raise UnknownName(f"{ref[:80]!r} is neither a share id (shr_...), a token nor a share link")
        found = await store.share_by_token(hash_token(token))
        if found is not None and session_id is not None and found.session_id != session_id:
            found = None
    if found is None:
        raise NotFound(f"no share {ref[:80]!r}" + (f" of session {session_id}" if session_id else ""))
    return found


async def revoke_share(store: Shares, ref: str, *, session_id: str | None = None) -> Share:
    """Revoke the share that `ref` names (see `find_share`): its link stops serving at once."""
    return await store.revoke_share((await find_share(store, ref, session_id=session_id)).id)

"""S3-compatible object storage (AWS S3, Cloudflare R2, MinIO, Ceph's RADOS Gateway), for what leaves the
database: the archive's objects and the S3 event sink's batches. `Bucket` is a small synchronous client
(callers run it in a thread) over boto3, imported only when a bucket is opened: the ``s3`` extra.

Why boto3 rather than aiobotocore or obstore: it is the reference client that every S3-compatible service
tests against (path-style addressing, its checksum rules, its retries), and the work here is a few large
requests at a time, where a thread per request costs nothing next to the network; aiobotocore pins exact
botocore versions (it often cannot be installed beside a project's boto3), and obstore, fast as it is, is
young and answers S3 errors in its own terms. boto3's newer default checksums (trailing CRC32, which some
gateways refuse) are asked for only where a service requires them."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

from ..errors import MissingExtra, NotFound, StoreUnavailable


@dataclass(frozen=True)
class BucketConfig:
    """Where objects go: a bucket, a key prefix, and the endpoint of a service that is not AWS itself
    (``http://127.0.0.1:7480``, ``https://ACCOUNT.r2.cloudflarestorage.com``). Credentials come from the
    environment as for any AWS tool (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, a profile)."""

    bucket: str
    prefix: str = "tether/"
    endpoint_url: str | None = None
    region: str | None = None

    def key(self, name: str) -> str:
        return self.prefix + name

    def where(self, name: str) -> str:
        return f"s3://{self.bucket}/{self.key(name)}"


class Bucket:
    """put, get, head, list, delete on one bucket; every failure a `StoreUnavailable` that says what to check
    (a missing object: `NotFound`)."""

    def __init__(self, config: BucketConfig) -> None:
        try:
            import boto3
            from botocore.config import Config as BotoConfig
        except ImportError as exc:
            raise MissingExtra("s3", exc.name or "boto3") from exc
        self.config = config
        endpoint = config.endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
        self._client: Any = boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name=config.region or os.environ.get("AWS_REGION") or "us-east-1",
            config=BotoConfig(
                s3={"addressing_style": "path" if endpoint else "auto"},
                retries={"max_attempts": 5, "mode": "standard"},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
                connect_timeout=10,
                read_timeout=60,
                max_pool_connections=32,
            ),
        )
        from botocore.exceptions import BotoCoreError, ClientError

        self._errors: tuple[type[Exception], ...] = (BotoCoreError, ClientError)

    def _fail(self, exc: Exception, doing: str, key: str) -> Exception:
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
        if code in ("NoSuchKey", "404", "NotFound"):
            return NotFound(f"no object s3://{self.config.bucket}/{key}")
        where = f"s3://{self.config.bucket}/{key}"
        hint = "check the bucket, the endpoint and the AWS_* credentials"
        if code == "NoSuchBucket":
            hint = f"create the bucket {self.config.bucket!r} first"
        return StoreUnavailable(f"could not {doing} {where}: {exc}", hint, path=where)

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        """Write the object whole, with its SHA-256 for the service to check on arrival."""
        import base64

        digest = base64.b64encode(hashlib.sha256(data).digest()).decode()
        try:
            self._client.put_object(
                Bucket=self.config.bucket, Key=key, Body=data, ContentType=content_type, ChecksumSHA256=digest
            )
        except self._errors as exc:
            raise self._fail(exc, "write", key) from exc

    def get(self, key: str) -> bytes:
        try:
            body = self._client.get_object(Bucket=self.config.bucket, Key=key)["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()
        except self._errors as exc:
            raise self._fail(exc, "read", key) from exc

    def exists(self, key: str) -> bool:
        try:
            self._client.head_object(Bucket=self.config.bucket, Key=key)
            return True
        except self._errors as exc:
            error = self._fail(exc, "look at", key)
            if isinstance(error, NotFound):
                return False
            raise error from exc

    def list(self, prefix: str) -> list[str]:
        """Every key under `prefix`, in key order."""
        keys: list[str] = []
        try:
            for page in self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.config.bucket, Prefix=prefix
            ):
                keys += [item["Key"] for item in page.get("Contents", [])]
        except self._errors as exc:
            raise self._fail(exc, "list", prefix) from exc
        return keys

    def delete(self, key: str) -> None:
        try:
            self._client.delete_object(Bucket=self.config.bucket, Key=key)
        except self._errors as exc:
            raise self._fail(exc, "delete", key) from exc

    def create(self) -> None:
        """Make the bucket (tests and first setups); one that exists and is ours is fine."""
        try:
            self._client.create_bucket(Bucket=self.config.bucket)
        except self._errors as exc:
            code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
            if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise self._fail(exc, "create", "") from exc

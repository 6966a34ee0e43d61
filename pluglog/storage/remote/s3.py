"""The ``s3`` remote storage provider: segment objects in an S3 bucket (boto3).

Keys (Kafka's ``rsm.config.`` prefix): ``rsm.config.s3.bucket`` (must
exist), ``rsm.config.s3.endpoint.url`` (any S3-compatible server; empty for
AWS), ``rsm.config.s3.region``, ``rsm.config.s3.prefix`` (put before every
object key) and ``rsm.config.s3.multipart.threshold.bytes``. Credentials
come from boto3's usual sources (environment, shared files, instance
roles), never from pluglog's config. A segment's ``.log`` object at least
the threshold large goes up as a multipart upload in parts of that size; a
failed one is aborted so no part lingers.

boto3 is imported here only, so a broker without tiered storage never loads
it. Blocking: called in the broker's remote-storage threads (boto3 clients
are thread-safe).
"""

import os

from zope.interface import implementer

from pluglog.errors import RemoteStorageError
from pluglog.interfaces import IRemoteLogStorage
from pluglog.storage.remote.metadata import PART_SUFFIXES

# An unreachable endpoint must fail an upload in seconds, not hang a thread
# for boto3's default minute; the manager retries on its next pass.
_CONNECT_TIMEOUT_S = 5
_READ_TIMEOUT_S = 30
_ATTEMPTS = 2


def _describe(exc):
    """One line for a boto3/botocore error."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict) and "Error" in response:
        error = response["Error"]
        code = error.get("Code", "?")
        message = error.get("Message") or ""
        return f"{code} {message}".strip()
    return " ".join(str(exc).split())


@implementer(IRemoteLogStorage)
class S3RemoteStorage:
    """IRemoteLogStorage over one S3 bucket."""

    def __init__(self, bucket, endpoint_url="", region="", prefix="", multipart_threshold=8 << 20):
        if not bucket:
            raise RemoteStorageError("rsm.config.s3.bucket is not set (the remote tier's bucket)")
        try:
            # A broker without tiered storage never imports boto3.
            import boto3
            from botocore.config import Config
        except ImportError:
            raise RemoteStorageError(
                "the s3 remote storage provider needs boto3: pip install 'pluglog[s3]'"
            ) from None

        self.bucket = bucket
        self.endpoint_url = endpoint_url or None
        self.prefix = prefix
        self.part_size = max(5 << 20, multipart_threshold)
        self.multipart_threshold = multipart_threshold
        config = Config(
            connect_timeout=_CONNECT_TIMEOUT_S,
            read_timeout=_READ_TIMEOUT_S,
            retries={"max_attempts": _ATTEMPTS, "mode": "standard"},
        )
        try:
            self.client = boto3.client(
                "s3", endpoint_url=self.endpoint_url, region_name=region or None, config=config
            )
        except Exception as exc:
            raise RemoteStorageError(f"cannot build the S3 client: {_describe(exc)}") from None

    def __repr__(self):
        return f"<S3RemoteStorage s3://{self.bucket}/{self.prefix}>"

    def _where(self):
        return f"bucket {self.bucket!r} at {self.endpoint_url or 'AWS'}"

    def _key(self, segment, part):
        return self.prefix + segment.object_key(part)

    def check(self):
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except Exception as exc:
            code = _describe(exc)
            if code.startswith(("404", "NoSuchBucket")):
                reason = "does not exist"
            elif code.startswith(("403", "AccessDenied", "InvalidAccessKeyId")):
                reason = f"refuses these credentials ({code})"
            else:
                reason = f"cannot be reached ({code})"
            raise RemoteStorageError(f"rsm.config.s3.bucket: {self._where()} {reason}") from None

    def copy_segment(self, segment, files):
        for part, source in files.items():
            key = self._key(segment, part)
            try:
                if isinstance(source, bytes | bytearray | memoryview):
                    self.client.put_object(Bucket=self.bucket, Key=key, Body=bytes(source))
                elif os.path.getsize(source) >= self.multipart_threshold:
                    self._multipart(key, source)
                else:
                    with open(source, "rb") as handle:
                        self.client.put_object(Bucket=self.bucket, Key=key, Body=handle.read())
            except RemoteStorageError:
                raise
            except Exception as exc:
                raise RemoteStorageError(
                    f"uploading {key} to {self._where()} failed: {_describe(exc)}"
                ) from None

    def _multipart(self, key, path):
        upload = self.client.create_multipart_upload(Bucket=self.bucket, Key=key)
        upload_id = upload["UploadId"]
        try:
            parts = []
            with open(path, "rb") as handle:
                number = 1
                while True:
                    body = handle.read(self.part_size)
                    if not body and parts:
                        break
                    answer = self.client.upload_part(
                        Bucket=self.bucket,
                        Key=key,
                        UploadId=upload_id,
                        PartNumber=number,
                        Body=body,
                    )
                    parts.append({"ETag": answer["ETag"], "PartNumber": number})
                    number += 1
                    if len(body) < self.part_size:
                        break
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}
            )
        except Exception:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            except Exception:
                pass  # the store is failing already; the first error is the one to report
            raise

    def fetch(self, segment, part, start, end):
        key = self._key(segment, part)
        if end is not None and end <= start:
            return b""
        ranged = f"bytes={start}-" if end is None else f"bytes={start}-{end - 1}"
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=key, Range=ranged)
            return answer["Body"].read()
        except Exception as exc:
            raise RemoteStorageError(
                f"reading {key} from {self._where()} failed: {_describe(exc)}"
            ) from None

    def delete_segment(self, segment):
        keys = [{"Key": self._key(segment, part)} for part in PART_SUFFIXES]
        try:
            answer = self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": keys, "Quiet": True}
            )
        except Exception as exc:
            raise RemoteStorageError(
                f"deleting {segment.object_key('log')} from {self._where()} failed: "
                f"{_describe(exc)}"
            ) from None
        errors = answer.get("Errors") or []
        if errors:
            first = errors[0]
            raise RemoteStorageError(
                f"deleting {first.get('Key')} from {self._where()} failed: "
                f"{first.get('Code')} {first.get('Message', '')}".strip()
            )

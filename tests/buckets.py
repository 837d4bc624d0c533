"""boto3 against the dev S3 server (s3/dev/up), as the tests' own client:
the settings are s3.env's (the `s3_server` fixture)."""
from __future__ import annotations

import hashlib
import secrets
from concurrent.futures import ThreadPoolExecutor

import boto3
from botocore.config import Config


def s3_client(settings: dict[str, str], secret: str | None = None):
    return boto3.client(
        "s3", endpoint_url=settings["AWS_ENDPOINT_URL"], region_name=settings["AWS_DEFAULT_REGION"],
        aws_access_key_id=settings["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=secret or settings["AWS_SECRET_ACCESS_KEY"],
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"},
                      max_pool_connections=16))


def new_bucket(s3) -> str:
    bucket = f"t-{secrets.token_hex(6)}"
    s3.create_bucket(Bucket=bucket)
    return bucket


def put_objects(s3, bucket: str, objects: dict[str, bytes]) -> None:
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda item: s3.put_object(Bucket=bucket, Key=item[0], Body=item[1]),
                      objects.items()))


def object_sha256(s3, bucket: str, key: str) -> str:
    digest = hashlib.sha256()
    for chunk in s3.get_object(Bucket=bucket, Key=key)["Body"].iter_chunks(1 << 20):
        digest.update(chunk)
    return digest.hexdigest()


def keys_below(s3, bucket: str, prefix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(obj["Key"] for page in pages for obj in page.get("Contents", []))

"""The dev S3 server (s3/dev/up: Debian's Swift with its S3 middleware)
answers boto3 as an S3 service does: buckets, objects byte for byte,
listing by prefix, multipart, and a wrong key refused."""
from __future__ import annotations

import hashlib
import secrets

import pytest
from botocore.exceptions import ClientError

from tests.buckets import s3_client


def test_objects_go_in_and_come_back_byte_for_byte(s3_server):
    s3 = s3_client(s3_server)
    bucket = f"dev-{secrets.token_hex(4)}"
    s3.create_bucket(Bucket=bucket)
    small, large = secrets.token_bytes(1000), secrets.token_bytes(12 << 20)
    s3.put_object(Bucket=bucket, Key="data/small.bin", Body=small)
    # 12 MiB in 5 MiB parts: multipart, as large objects go.
    upload = s3.create_multipart_upload(Bucket=bucket, Key="data/large.bin")["UploadId"]
    parts = [{"PartNumber": n + 1, "ETag": s3.upload_part(
        Bucket=bucket, Key="data/large.bin", UploadId=upload, PartNumber=n + 1,
        Body=large[n * (5 << 20):(n + 1) * (5 << 20)])["ETag"]} for n in range(3)]
    s3.complete_multipart_upload(Bucket=bucket, Key="data/large.bin", UploadId=upload,
                                 MultipartUpload={"Parts": parts})
    s3.put_object(Bucket=bucket, Key="other.txt", Body=b"x")
    for key, body in (("data/small.bin", small), ("data/large.bin", large)):
        got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert hashlib.sha256(got).hexdigest() == hashlib.sha256(body).hexdigest()
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="data/")
    assert sorted((o["Key"], o["Size"]) for o in listed["Contents"]) == [
        ("data/large.bin", 12 << 20), ("data/small.bin", 1000)]
    for key in ("data/small.bin", "data/large.bin", "other.txt"):
        s3.delete_object(Bucket=bucket, Key=key)
    s3.delete_bucket(Bucket=bucket)


def test_a_wrong_secret_is_refused(s3_server):
    with pytest.raises(ClientError) as refused:
        s3_client(s3_server, secret="not-the-secret").list_buckets()
    assert refused.value.response["Error"]["Code"] in ("SignatureDoesNotMatch", "AccessDenied")

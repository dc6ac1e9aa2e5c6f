"""A finished job's work directory in a bucket goes in batches: S3's DeleteObjects takes
1,000 keys a request, so a directory of N objects costs about N / 1000 delete requests
(``pipelines.job.workfiles.delete_tree``), many at once."""

from __future__ import annotations

import threading

import botocore.client
import pytest

from pipelines.job import workfiles
from transforms.stores import StoreConfig, get_store


@pytest.fixture
def s3(moto_server, s3_env):
    bucket = moto_server.new_bucket()
    return moto_server, bucket, StoreConfig(s3_endpoint=moto_server.url)


def test_an_s3_work_directory_is_deleted_in_batches(s3, monkeypatch):
    server, bucket, cfg = s3
    n = 2_345
    client = server.client()
    for i in range(n):
        client.put_object(Bucket=bucket, Key=f"work/j/piece-{i:06d}.json", Body=b"{}")
    client.put_object(Bucket=bucket, Key="work/other/keep.json", Body=b"{}")
    store = get_store(f"s3://{bucket}/work/j", cfg)
    calls, lock = [], threading.Lock()
    real = botocore.client.BaseClient._make_api_call

    def counted(self, operation, params):
        # every thread's client (the store keeps one a thread)
        assert operation != "DeleteObject", "one request an object"
        if operation == "DeleteObjects":
            with lock:
                calls.append(len(params["Delete"]["Objects"]))
        return real(self, operation, params)

    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", counted)
    workfiles.delete_tree(store, f"s3://{bucket}/work/j")
    assert sorted(calls) == [345, 1000, 1000]
    assert server.keys(bucket) == ["work/other/keep.json"]


def test_deleting_keys_that_are_gone_is_no_error(s3):
    _, bucket, cfg = s3
    store = get_store(f"s3://{bucket}/x", cfg)
    store.delete_many([f"s3://{bucket}/gone-{i}" for i in range(3)])

"""Which client opens which URL, and fsspec's storage options as obstore's configuration (no network).

There is no GCS or Azure emulator here: for ``gs://`` and ``az://`` these tests check the routing and the
mapping of options; the requests themselves are tested on the S3 test server only.
"""

from __future__ import annotations

import pickle
from datetime import timedelta

import pytest

from deltacells.errors import InvalidValueError, UnmappedOptionError
from deltacells.storage import FsspecStore, ObstoreStore, open_store
from deltacells.storage._obstore_options import obstore_settings

pytest.importorskip("obstore")

TIMEOUTS = {"connect": 10.0, "read": 30.0}


def settings(url: str, options: dict, total: float | None = 120.0):
    return obstore_settings(url, options, timeouts=TIMEOUTS, total_timeout=total)


@pytest.fixture(autouse=True)
def _auto_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DELTACELLS_STORAGE_CLIENT", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")  # no botocore credential chain in these tests


@pytest.mark.parametrize("url", ["s3://b/p", "s3a://b/p", "gs://b/p", "gcs://b/p", "az://c/p"])
def test_buckets_open_with_obstore(url: str) -> None:
    store = open_store(url, {"anon": True} if url.startswith("s3") else None)
    assert isinstance(store, ObstoreStore)
    assert store.url == url
    assert not store.is_local
    assert store.atomic_conditional_writes


@pytest.mark.parametrize("url", ["memory://x/y", "http://h/p", "file:///tmp/x", "relative/path"])
def test_other_urls_open_with_fsspec(url: str) -> None:
    assert type(open_store(url)) is FsspecStore


def test_an_unmapped_option_falls_back_to_fsspec() -> None:
    options = {"key": "k", "secret": "s", "s3_additional_kwargs": {"ServerSideEncryption": "AES256"}}
    assert type(open_store("s3://b/p", options)) is FsspecStore
    with pytest.raises(UnmappedOptionError, match="s3_additional_kwargs.*fsspec"):
        ObstoreStore("s3://b/p", options)


def test_the_environment_forces_a_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DELTACELLS_STORAGE_CLIENT", "fsspec")
    assert type(open_store("s3://b/p", {"anon": True})) is FsspecStore
    monkeypatch.setenv("DELTACELLS_STORAGE_CLIENT", "obstore")
    assert type(open_store("s3://b/p", {"anon": True})) is ObstoreStore
    assert type(open_store("memory://b/p")) is FsspecStore  # obstore serves buckets only
    with pytest.raises(UnmappedOptionError):  # forced: an option that does not map is an error, not fsspec
        open_store("s3://b/p", {"version_aware": True})
    monkeypatch.setenv("DELTACELLS_STORAGE_CLIENT", "boto")
    with pytest.raises(InvalidValueError, match="DELTACELLS_STORAGE_CLIENT"):
        open_store("s3://b/p")


def test_s3_options() -> None:
    got = settings(
        "s3://bucket/prefix",
        {
            "key": "AK",
            "secret": "SK",
            "token": "ST",
            "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-3"},
            "config_kwargs": {
                "connect_timeout": 3,
                "read_timeout": 7,
                "retries": {"max_attempts": 2},
                "max_pool_connections": 50,
                "s3": {"addressing_style": "virtual"},
            },
            "skip_instance_cache": True,
            "use_listings_cache": False,
        },
    )
    assert got.kind == "s3"
    assert got.config == {
        "bucket": "bucket",
        "access_key_id": "AK",
        "secret_access_key": "SK",
        "session_token": "ST",
        "endpoint": "http://127.0.0.1:9000",
        "region": "eu-west-3",
        "virtual_hosted_style_request": True,
    }
    assert got.client == {
        "connect_timeout": timedelta(seconds=3),
        "read_timeout": timedelta(seconds=7),
        "timeout": timedelta(seconds=120),
        "allow_http": True,
    }
    assert got.botocore_profile is None


def test_s3_anonymous_and_defaults() -> None:
    got = settings("s3://bucket", {"anon": True, "endpoint_url": "https://s3.example.org"}, total=None)
    assert got.config == {"bucket": "bucket", "skip_signature": True, "endpoint": "https://s3.example.org"}
    assert got.client == {
        "connect_timeout": timedelta(seconds=10),
        "read_timeout": timedelta(seconds=30),
        "timeout": timedelta(days=1),
    }


def test_s3_credentials_from_botocore_without_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    assert settings("s3://b", {"profile": "lab"}).botocore_profile == "lab"
    assert settings("s3://b", {}).botocore_profile is None  # AWS_ACCESS_KEY_ID set: obstore reads the environment
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    assert settings("s3://b", {}).botocore_profile == ""  # botocore's default chain, as s3fs's


@pytest.mark.parametrize(
    "options",
    [
        {"config_kwargs": {"response_checksum_validation": "when_supported"}},
        {"client_kwargs": {"verify": False}},
        {"version_aware": True},
        {"config_kwargs": {"s3": {"payload_signing_enabled": True}}},
    ],
)
def test_s3_unmapped(options: dict) -> None:
    name = next(iter(options))
    with pytest.raises(UnmappedOptionError, match=name):
        settings("s3://b", options)


def test_gcs_options(tmp_path) -> None:
    key_file = tmp_path / "sa.json"
    key_file.write_text("{}")
    assert settings("gs://b/p", {"token": "anon"}).config == {"bucket": "b", "skip_signature": True}
    assert settings("gs://b/p", {"token": str(key_file), "project": "x"}).config == {
        "bucket": "b",
        "service_account": str(key_file),
    }
    assert settings("gcs://b/p", {"token": {"type": "service_account"}}).config == {
        "bucket": "b",
        "service_account_key": '{"type": "service_account"}',
    }
    got = settings("gs://b", {"token": "google_default", "endpoint_url": "http://127.0.0.1:4443"})
    assert got.config == {"bucket": "b", "base_url": "http://127.0.0.1:4443"}
    assert got.client["allow_http"] is True
    with pytest.raises(UnmappedOptionError, match="token"):
        settings("gs://b", {"token": "browser"})
    with pytest.raises(UnmappedOptionError, match="requester_pays"):
        settings("gs://b", {"requester_pays": True})


def test_azure_options() -> None:
    got = settings("az://container/p", {"account_name": "acct", "account_key": "k", "sas_token": "sv=1"})
    assert got.kind == "azure"
    assert got.config == {"container_name": "container", "account_name": "acct", "account_key": "k", "sas_key": "sv=1"}
    with pytest.raises(UnmappedOptionError, match="connection_string"):
        settings("az://c", {"connection_string": "DefaultEndpointsProtocol=https"})


def test_a_url_without_bucket() -> None:
    with pytest.raises(InvalidValueError, match="names no bucket"):
        ObstoreStore("s3://")


def test_pickles_to_url_and_options() -> None:
    store = ObstoreStore("gs://b/p", {"token": "anon"}, io_concurrency=5)
    clone = pickle.loads(pickle.dumps(store))
    assert (type(clone), clone.url, clone.storage_options, clone.io_concurrency) == (
        ObstoreStore,
        "gs://b/p",
        {"token": "anon"},
        5,
    )


def test_importing_deltacells_does_not_import_obstore() -> None:
    import subprocess
    import sys

    code = "import sys, deltacells, deltacells.storage; sys.exit('obstore' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_version_tags_and_put_modes() -> None:
    """A tag is the ETag, and the version where the store keeps one (GCS's generation): both go to the update."""
    from deltacells.storage._obstore import _tag, _update_mode

    assert _tag({"e_tag": '"abc"', "version": None}) == '"abc"'
    assert _update_mode(_tag({"e_tag": '"abc"', "version": None})) == {"e_tag": '"abc"'}
    tag = _tag({"e_tag": "CJ2", "version": "1700000000000001"})
    assert _update_mode(tag) == {"e_tag": "CJ2", "version": "1700000000000001"}

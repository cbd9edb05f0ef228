"""fsspec's ``storage_options`` for ``s3://``, ``gs://`` and ``az://`` as obstore's configuration.

Users pass the options of s3fs, gcsfs or adlfs (``storage_options=`` has always gone to fsspec); an
:class:`~deltacells.storage.ObstoreStore` maps the common ones to obstore's store configuration, client options
and credentials (:func:`obstore_settings`). An option it cannot map raises :class:`UnmappedOptionError`, and
:func:`~deltacells.storage.open_store` then opens an :class:`~deltacells.storage.FsspecStore` instead, which
understands every option of its filesystem: no ``storage_options`` that worked stop working.

Mapped (everything else is unmapped):

- ``s3://``, ``s3a://`` (s3fs): ``key``, ``secret``, ``token``, ``anon``, ``profile``, ``endpoint_url``,
  ``requester_pays``, ``client_kwargs`` (``endpoint_url``, ``region_name``, ``aws_access_key_id``,
  ``aws_secret_access_key``, ``aws_session_token``), ``config_kwargs`` (``connect_timeout``, ``read_timeout``,
  ``s3.addressing_style``; ``retries``, ``max_pool_connections`` and ``response_checksum_validation="when_required"``
  change nothing: deltacells retries, obstore's connection pool has no cap and checks no response checksum).
  Without keys in the options or the environment (``AWS_ACCESS_KEY_ID``), credentials come from botocore's chain
  (profiles, ``~/.aws``, SSO, the instance's role), as s3fs finds them, when botocore is installed.
- ``gs://``, ``gcs://`` (gcsfs): ``token`` (``None``, ``"google_default"``, ``"cloud"``: the default credentials;
  ``"anon"``: unsigned; a path to a service account's JSON file; a dict of its contents), ``endpoint_url``,
  ``project`` (not needed by object requests).
- ``az://`` (adlfs): ``account_name``, ``account_key``, ``sas_token``, ``tenant_id``, ``client_id``,
  ``client_secret``, ``anon``.
- For all: fsspec's own caching options (``skip_instance_cache``, ``use_listings_cache``,
  ``listings_expiry_time``, ``default_block_size``, ``default_cache_type``, ``max_concurrency``...), which have no
  meaning for a store that caches nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from deltacells.errors import InvalidValueError, UnmappedOptionError

__all__ = [
    "OBSTORE_PROTOCOLS",
    "ObstoreSettings",
    "obstore_settings",
    "split_url",
]

#: URL schemes an ObstoreStore serves, and the obstore store class of each.
OBSTORE_PROTOCOLS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure"}

#: fsspec options about fsspec's own instance and listing caches: meaningless for obstore, dropped.
_FSSPEC_CACHING = frozenset(
    {
        "skip_instance_cache",
        "use_listings_cache",
        "listings_expiry_time",
        "max_paths",
        "default_block_size",
        "default_cache_type",
        "default_fill_cache",
        "cache_regions",
        "max_concurrency",
        "asynchronous",
        "loop",
        "fixed_upload_size",
    }
)


@dataclass
class ObstoreSettings:
    """What one store needs of obstore: which store class, its configuration, client options, credentials.

    Attributes
    ----------
    kind
        ``"s3"``, ``"gcs"`` or ``"azure"``.
    config
        The store's configuration (``S3Config``, ``GCSConfig``, ``AzureConfig``), bucket included.
    client
        The HTTP client's options (``ClientConfig``), timeouts included.
    botocore_profile
        Credentials from botocore's chain, with this profile (``""``: the default one); None: not from botocore.
    """

    kind: str
    config: dict[str, Any] = field(default_factory=dict)
    client: dict[str, Any] = field(default_factory=dict)
    botocore_profile: str | None = None


def split_url(url: str) -> tuple[str, str, str]:
    """``scheme://bucket/key`` as ``(scheme, bucket, key)``, the key without slashes at its ends."""
    scheme, _, rest = url.partition("://")
    bucket, _, key = rest.partition("/")
    if not bucket:
        msg = f"{url!r} names no bucket: give a URL like {scheme}://bucket/prefix"
        raise InvalidValueError(msg)
    return scheme.lower(), bucket, key.strip("/")


def obstore_settings(
    url: str, options: Mapping[str, Any], *, timeouts: Mapping[str, float], total_timeout: float | None
) -> ObstoreSettings:
    """The obstore settings of the store at ``url`` with fsspec's ``options``.

    Parameters
    ----------
    url
        An ``s3://``, ``s3a://``, ``gs://``, ``gcs://`` or ``az://`` URL.
    options
        The ``storage_options`` of s3fs, gcsfs or adlfs.
    timeouts
        Default ``connect`` and ``read`` timeouts in seconds, where the options set none.
    total_timeout
        Seconds one request may take in all (None: a day).

    Raises
    ------
    UnmappedOptionError
        For an option obstore's configuration cannot express, naming it.
    """
    scheme, bucket, _ = split_url(url)
    kind = OBSTORE_PROTOCOLS.get(scheme)
    if kind is None:
        msg = f"obstore serves {', '.join(f'{p}://' for p in OBSTORE_PROTOCOLS)} URLs, not {scheme}://"
        raise InvalidValueError(msg)
    rest = {key: value for key, value in options.items() if key not in _FSSPEC_CACHING}
    settings = ObstoreSettings(kind)
    client: dict[str, Any] = {}
    if kind == "s3":
        settings.config["bucket"] = bucket
        _s3(rest, settings, client)
    elif kind == "gcs":
        settings.config["bucket"] = bucket
        _gcs(rest, settings)
    else:
        settings.config["container_name"] = bucket
        _azure(rest, settings)
    if rest:
        name = sorted(rest)[0]
        msg = (
            f"storage option {name!r} of {scheme}:// has no equivalent in obstore's configuration; "
            "deltacells opens this URL with fsspec instead (or pass an FsspecStore)"
        )
        raise UnmappedOptionError(msg)
    connect = client.pop("connect_timeout", timeouts["connect"])
    read = client.pop("read_timeout", timeouts["read"])
    settings.client = {
        "connect_timeout": timedelta(seconds=float(connect)),
        "read_timeout": timedelta(seconds=float(read)),
        "timeout": timedelta(seconds=float(total_timeout) if total_timeout else 86400.0),
    }
    endpoint = settings.config.get("endpoint") or settings.config.get("base_url")
    if isinstance(endpoint, str) and endpoint.startswith("http://"):
        settings.client["allow_http"] = True
    return settings


def _take(options: dict[str, Any], key: str) -> Any:
    return options.pop(key, None)


def _s3(options: dict[str, Any], settings: ObstoreSettings, client: dict[str, Any]) -> None:
    """The options of s3fs into ``settings`` and ``client``; what it maps is removed from ``options``."""
    config = settings.config
    client_kwargs = dict(_take(options, "client_kwargs") or {})
    credentials = {
        "access_key_id": _take(options, "key") or _take(client_kwargs, "aws_access_key_id"),
        "secret_access_key": _take(options, "secret") or _take(client_kwargs, "aws_secret_access_key"),
        "session_token": _take(options, "token") or _take(client_kwargs, "aws_session_token"),
    }
    config.update({name: value for name, value in credentials.items() if value})
    endpoint = _take(options, "endpoint_url") or _take(client_kwargs, "endpoint_url")
    if endpoint:
        config["endpoint"] = str(endpoint)
    region = _take(client_kwargs, "region_name")
    if region:
        config["region"] = str(region)
    for key in ("key", "secret", "token"):  # given as None
        options.pop(key, None)
    if _take(options, "anon"):
        config["skip_signature"] = True
    if _take(options, "requester_pays"):
        config["request_payer"] = True
    profile = _take(options, "profile")
    if client_kwargs:
        options["client_kwargs"] = client_kwargs  # unmapped: reported
    config_kwargs = dict(_take(options, "config_kwargs") or {})
    for name in ("connect_timeout", "read_timeout"):
        if name in config_kwargs:
            client[name] = config_kwargs.pop(name)
    config_kwargs.pop("retries", None)  # deltacells' RetryPolicy retries
    config_kwargs.pop("max_pool_connections", None)  # obstore's pool has no cap
    if config_kwargs.get("response_checksum_validation") == "when_required":
        del config_kwargs["response_checksum_validation"]  # what obstore does: no checksum of responses
    addressing = dict(config_kwargs.pop("s3", None) or {})
    style = addressing.pop("addressing_style", None)
    if style in ("virtual", "path"):
        config["virtual_hosted_style_request"] = style == "virtual"
    elif style is not None:
        addressing["addressing_style"] = style
    if addressing:
        config_kwargs["s3"] = addressing
    if config_kwargs:
        options["config_kwargs"] = config_kwargs  # unmapped: reported
    signed = "access_key_id" in config or config.get("skip_signature")
    if not signed and (profile is not None or not os.environ.get("AWS_ACCESS_KEY_ID")):
        settings.botocore_profile = str(profile or "")  # s3fs's way: botocore's chain of credentials


def _gcs(options: dict[str, Any], settings: ObstoreSettings) -> None:
    """The options of gcsfs into ``settings``; what it maps is removed from ``options``."""
    config = settings.config
    options.pop("project", None)  # names the project of new buckets; object requests do not need it
    token = options.pop("token", None)
    if token in (None, "google_default", "cloud"):
        pass  # obstore's default: GOOGLE_APPLICATION_CREDENTIALS, the application default credentials, metadata
    elif token == "anon":
        config["skip_signature"] = True
    elif isinstance(token, dict):
        config["service_account_key"] = json.dumps(token)
    elif isinstance(token, str | os.PathLike) and os.path.isfile(token):
        config["service_account"] = os.fspath(token)
    else:
        options["token"] = token  # unmapped (browser or cache tokens, a credentials object): reported
    endpoint = options.pop("endpoint_url", None)
    if endpoint:
        config["base_url"] = str(endpoint)


_AZURE = {
    "account_name": "account_name",
    "account_key": "account_key",
    "sas_token": "sas_key",
    "tenant_id": "tenant_id",
    "client_id": "client_id",
    "client_secret": "client_secret",
}


def _azure(options: dict[str, Any], settings: ObstoreSettings) -> None:
    """The options of adlfs into ``settings``; what it maps is removed from ``options``."""
    for ours, theirs in _AZURE.items():
        value = options.pop(ours, None)
        if value:
            settings.config[theirs] = str(value)
    if options.pop("anon", None):
        settings.config["skip_signature"] = True

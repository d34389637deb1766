"""Scraping ``GET /metrics`` of a running node in tests."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(base_url: str, token: str, timeout: float = 5.0) -> Samples:
    """Every sample of one scrape: ``{(name, sorted labels): value}``."""
    request = urllib.request.Request(base_url.rstrip("/") + "/metrics",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        assert response.status == 200
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: Samples, name: str, default: float | None = None, **labels: str) -> float:
    """The sample ``name{labels}``; ``default`` (or an AssertionError) if absent."""
    key = (name, tuple(sorted(labels.items())))
    if key in samples:
        return samples[key]
    if default is not None:
        return default
    raise AssertionError(f"no sample {name}{labels} in the scrape; have: "
                         f"{sorted({k[0] for k in samples})}")

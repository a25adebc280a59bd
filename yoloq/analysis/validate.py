"""`validate_dataset`: a local data YAML or an `s3://` one, each checked by its own module.

Above both `analysis.dataset` (local folders) and `datasets.s3_analysis` (which builds on
it), so the local checker never imports the S3 one back.
"""

from __future__ import annotations

from pathlib import Path

from yoloq.analysis.dataset import LABEL_SCAN_LIMIT, DatasetInfo, validate_local_dataset


def validate_dataset(data_yaml: str | Path, limit: int = LABEL_SCAN_LIMIT) -> DatasetInfo:
    """Check a detection data YAML, its image folders and label files; raise DatasetError."""
    if str(data_yaml).startswith("s3://"):  # listed and labels read in S3, images not downloaded
        from yoloq.datasets.s3_analysis import validate_s3_dataset  # imports botocore

        return validate_s3_dataset(str(data_yaml), limit)
    return validate_local_dataset(data_yaml, limit)

"""`validate_dataset`: a local data YAML or an `s3://` one, each checked by its own module.

The analysis (the ground layer) checks local folders and takes this as its `validate` for
a spec whose data may be in S3: admission and the job's analyse task pass it, so the S3
reader (botocore, the S3 block) stays above the analysis.
"""

from __future__ import annotations

from pathlib import Path

from yoloq.analysis.dataset import LABEL_SCAN_LIMIT, DatasetInfo, validate_local_dataset


def validate_dataset(data_yaml: str | Path, limit: int = LABEL_SCAN_LIMIT, task: str = "detect") -> DatasetInfo:
    """Check a data YAML, its image folders and the label files a `task` model trains from;
    raise DatasetError."""
    if str(data_yaml).startswith("s3://"):  # listed and labels read in S3, images not downloaded
        from yoloq.datasets.s3_analysis import validate_s3_dataset  # imports botocore

        return validate_s3_dataset(str(data_yaml), limit, task)
    return validate_local_dataset(data_yaml, limit, task)

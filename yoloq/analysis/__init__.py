"""Job analysis without torch: validate a spec and its dataset, fingerprint checkpoints,
estimate memory and time, and classify the job. See docs/analysis.md."""

from yoloq.analysis.core import Analysis, analyse, analyse_file
from yoloq.analysis.dataset import DatasetInfo, validate_dataset
from yoloq.analysis.fingerprint import Fingerprint, fingerprint

__all__ = ["Analysis", "DatasetInfo", "Fingerprint", "analyse", "analyse_file", "fingerprint",
           "validate_dataset"]

"""From a composed Hydra config to what a run uses, before anything loads: ``resolve`` (the plain dict the run id
hashes), ``validate`` (every field against its allowed values), ``numeric_fields`` (type, range and canonical
value of the numeric fields), ``decode_spec`` (the acceptance rule and its heads), ``optional_deps`` (optional
packages, GPU, launcher checks)."""

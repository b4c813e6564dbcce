//! The modules: what each step does on a host, for real or as a dry-run prediction.

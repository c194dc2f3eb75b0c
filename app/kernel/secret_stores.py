"""Where a user's keys and tokens live under their home: one list for every guard that needs it.

Memory imports never read these (``context/import_policy.py``) and the command sandbox hides
them (``tools/sandbox.py``).
"""

from __future__ import annotations

HOME_SECRET_STORES = (
    ".ssh", ".aws", ".gnupg", ".netrc", ".git-credentials", ".pgpass", ".docker", ".kube",
    ".azure", ".npmrc", ".pypirc", ".password-store", ".terraform.d", ".vault-token",
    ".config/gcloud", ".config/gh", ".config/hub", ".config/op", ".local/share/keyrings",
    ".cargo/credentials", ".cargo/credentials.toml", ".gem/credentials", ".my.cnf",
    ".config/rclone", ".config/doctl", ".oci", ".s3cfg", ".config/containers/auth.json",
)

#!/usr/bin/env bash
# Builds the Debian package operators install: target/debian/natm_<version>_<arch>.deb
# (README "Install as a package"; docs/decisions/0032-debian-package.md). What goes in
# it is [package.metadata.deb] in Cargo.toml; cargo-deb builds the release binary
# itself. Man pages and completions are generated first by crates/natm-gen into
# target/debian-assets, where those assets point.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo >/dev/null || { echo "cargo not found: install Rust with rustup" >&2; exit 1; }
if ! cargo deb --version >/dev/null 2>&1; then
  # A compile: 1 min 44 s on this 2-CPU machine beside other builds (issue 32).
  echo "package.sh: installing cargo-deb (cargo install cargo-deb --locked)" >&2
  start=$SECONDS
  cargo install cargo-deb --locked --quiet
  echo "package.sh: cargo-deb installed in $((SECONDS - start)) s" >&2
fi
assets=target/debian-assets
rm -rf "$assets"
cargo run --quiet --release -p natm-gen -- man "$assets/man"
cargo run --quiet --release -p natm-gen -- completions "$assets/completions"
# Debian ships man pages compressed; -n keeps the timestamp out (reproducible).
gzip -9n "$assets"/man/*.1

cargo deb -p natm-cli --output target/debian/

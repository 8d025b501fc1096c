#!/bin/sh
# Takes the screenshots of the web pages in docs/screenshots/ with a real headless browser.
#
# Needs Debian's chromium (`apt-get install -y chromium`). The ignored test `screenshots` in
# tests/tests/pages.rs starts a relay on a random loopback port in a temporary directory,
# publishes three sample repositories (one with a hostile name and description, to see that it
# is shown as text), and runs
#   chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
#     --disable-background-networking --disable-component-update --disable-sync \
#     --user-data-dir=<temp> --screenshot=docs/screenshots/<page>.png --window-size=1200,900 <url>
# (1200,2000 for the home page, so that its repository list shows)
# for the home page and two repository pages.
set -eu
cd "$(dirname "$0")/../.."
cargo build --workspace
cargo test -p grasp-tests --test pages -- --ignored --exact screenshots
ls -l docs/screenshots/*.png

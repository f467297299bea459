#!/bin/sh
# Run the emulator's own tests (used by `make check`).
here=$(cd "$(dirname "$0")" && pwd)
py=python3
# Debian's interpreter carries pytest and python3-elasticsearch
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
exec "$py" -m pytest -q -p no:cacheprovider "$here"

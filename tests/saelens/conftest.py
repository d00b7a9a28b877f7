"""Tests against the real sae-lens and transformer-lens packages, which live in their own venv.

sae-lens pins jaxtyping and typeguard versions that break inseq and interpreto, so these tests never run in the
main test venv: ``tests/conftest.py`` leaves this directory out unless it is named on the command line, and
``.ci/run`` runs ``python -m pytest tests/saelens`` in a second venv with ``pip install -e . sae-lens pytest``.
Every test module here sets ``pytestmark = pytest.mark.saelens``.
"""

"""Parameter validation shared by the model zoo (re-exported from :mod:`lpjax._checks`)."""

from .._checks import finite_array as finite_array, positive_vector as positive_vector

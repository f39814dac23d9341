"""The original's ``verifiers.v1.utils`` modules that tasksets written for 0.3/0.4 import (private
there, but real environments reach for them): each is a thin module over ours."""

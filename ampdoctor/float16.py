"""float16's range, for both halves: lint (which never imports torch) and trace.

float16 holds magnitudes up to 65504; below 2**-14 it keeps fewer significant bits (the
subnormal band, spaced 2**-24 apart), and below 2**-24, its smallest subnormal, a nonzero value
becomes zero. Below 2**-20 a subnormal keeps at most 4 significant bits: rounding moves it by up
to 2**-25, more than 2**-5 of its value (up to half of it just above 2**-24).
"""

FLOAT16_MAX = 65504.0
FLOAT16_SMALLEST_SUBNORMAL = 2.0**-24
FLOAT16_SMALLEST_NORMAL = 2.0**-14
FLOAT16_COARSE_SUBNORMAL = 2.0**-20

"""transforms.lazynp: numpy imported at first use, arrays recognised without importing it."""

import os

from support.scripts import run_python

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_numpy_is_imported_at_first_use_only():
    code = (
        "import sys; from transforms import ops; from transforms import lazynp; from transforms.ops import images; "
        "assert 'numpy' not in sys.modules and lazynp.loaded() is None; "
        "assert not lazynp.is_array(b'x') and not lazynp.is_array([1]); "
        "assert 'numpy' not in sys.modules; "
        "a = lazynp.np.zeros((2, 3), dtype=lazynp.np.uint8); "
        "import numpy; assert lazynp.loaded() is numpy and lazynp.is_array(a) and type(a) is numpy.ndarray; "
        "assert not lazynp.is_array(numpy.uint8(3)); "
        "r = images.resize(numpy.full((4, 6, 3), 7, numpy.uint8), (3, 2)); "
        "assert r.shape == (2, 3, 3) and int(r.min()) == int(r.max()) == 7; print('ok')"
    )
    p = run_python(code)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr

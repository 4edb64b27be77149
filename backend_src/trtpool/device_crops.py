"""trtpool.device_crops is trtpool.vision.device_crops, under the name process files written before it moved import.

The module object is the same one (sys.modules), so its names, and whatever a test or a
process file sets on it, are shared.
"""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("trtpool.vision.device_crops")

import json
import os
import sys

print(json.dumps({
    "name": __name__,
    "argv": sys.argv,
    "path0": sys.path[0],
    "file": os.path.abspath(__file__),
}))

from .averages import mean
from .middle import median

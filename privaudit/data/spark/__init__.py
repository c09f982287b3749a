"""The Apache Spark engine of the data path: reading, fatal rules, bounding and exact counts on Spark.

Start at :mod:`privaudit.data.spark.engine` (:func:`~privaudit.data.spark.engine.spark_sparse_counts`, the whole
data side of a release). pyspark is the optional extra ``privaudit[spark]``: only the modules of this package
import it, and nothing outside imports them at module top.
"""

import warnings

# pyspark warns, on import and on Spark Connect calls, when pandas >= 3 is installed (pandas comes with the
# Connect client; the engine itself moves data as Arrow only): that one warning is silenced for the process,
# here, before any module of this package imports pyspark.
warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)

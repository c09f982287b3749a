"""The Apache Spark engine of the data path: reading, fatal rules, bounding and exact counts on Spark."""

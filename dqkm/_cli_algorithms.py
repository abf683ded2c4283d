"""The ``--algorithm`` names of ``dqkm fit``."""

#: algorithm name on the command line -> estimator class name in dqkm
ALGORITHMS = {"kmeans": "KMeans", "qkmeans": "QKMeans", "kmm": "KMultipleMeans",
              "sekmeans": "SparseEmbeddedKMeans", "kmeans-l1": "KMeansL1"}

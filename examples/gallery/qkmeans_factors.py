"""QuicK-means: centroids as a product of sparse factors

:class:`dqkm.QKMeans` keeps its K×D centroid matrix as ``λ·S1···SQ``, a product of
sparse factors refitted by palm4MSA at every iteration, so assigning a point costs
the factors' flops instead of the dense ``2·K·D``. On scikit-learn's 8×8 digits the
example compares the flops of the assignment, the objective and the agreement with
the true digits against :class:`dqkm.KMeans` (the palm4MSA budgets are kept small
so that the page builds quickly; see the user guide for when QK-means pays off).
"""

import dqkm
from dqkm import datasets, metrics

X, y = datasets.load_digits(chunks=600)
y = y.compute()
km = dqkm.KMeans(10, n_init=1, random_state=0).fit(X)
qk = dqkm.QKMeans(10, sparsity=3, palm_iter_init=30, palm_iter=10, max_iter=5, n_init=1,
                  random_state=0).fit(X)

print(f"{'model':<8} {'flops per point':>16} {'objective':>12} {'AMI':>6}")
for name, model in (("KMeans", km), ("QKMeans", qk)):
    print(f"{name:<8} {metrics.model_flops(model):>16,} {metrics.objective(model, X):>12.4g} "
          f"{metrics.ami(y, model.labels_.compute()):>6.3f}")
print("factors:", qk.factors_)
print("compression of the centroid matrix:", round(qk.factors_.compression, 2))

"""scikit-learn style clustering estimators."""
